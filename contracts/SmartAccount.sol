// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Account} from "@openzeppelin/contracts/account/Account.sol";
import {ERC7821} from "@openzeppelin/contracts/account/extensions/draft-ERC7821.sol";
import {IERC1271} from "@openzeppelin/contracts/interfaces/IERC1271.sol";
import {Clones} from "@openzeppelin/contracts/proxy/Clones.sol";
import {Initializable} from "@openzeppelin/contracts/proxy/utils/Initializable.sol";
import {SignerECDSA} from "@openzeppelin/contracts/utils/cryptography/signers/SignerECDSA.sol";

/// @title ERC-4337 smart account with one ECDSA owner, from OpenZeppelin Contracts' account kit
/// @notice The design of OpenZeppelin's `Account` guide: `Account` (ERC-4337 validation against the
/// canonical EntryPoint), `SignerECDSA` (the owner's key), `ERC7821` (batched calls by the account
/// itself or the EntryPoint), initialised once as a clone. ERC-1271 accepts the owner's signature of
/// the hash as given, as passkey and smart-wallet SDKs produce for EIP-712 and EIP-191 messages.
/// (OpenZeppelin's guide adds ERC-7739's nested typed data against replay across accounts of one
/// owner; ERC-3009 authorizations and sign-in messages name the account itself, so plain hashes serve.)
contract SmartAccount is Account, SignerECDSA, ERC7821, Initializable, IERC1271 {
    /// The implementation behind every clone is never initialised itself.
    constructor() SignerECDSA(address(0)) {
        _disableInitializers();
    }

    function initialize(address owner) external initializer {
        _setSigner(owner);
    }

    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        return _rawSignatureValidation(hash, signature) ? IERC1271.isValidSignature.selector : bytes4(0xffffffff);
    }

    function _erc7821AuthorizedExecutor(address caller, bytes32 mode, bytes calldata executionData)
        internal
        view
        override
        returns (bool)
    {
        return caller == address(entryPoint()) || super._erc7821AuthorizedExecutor(caller, mode, executionData);
    }
}

/// @title Counterfactual factory of `SmartAccount`s (CREATE2 minimal clones)
/// @notice The address of an owner's account is known before it exists (`getAddress`), so it can sign
/// in and be paid to before anyone deploys it; its ERC-6492 signatures carry `createAccount`'s
/// calldata for verifiers to deploy it in simulation. `createAccount` is idempotent and open to
/// anyone: the account it deploys belongs to `owner` whoever pays the gas.
contract SmartAccountFactory {
    SmartAccount public immutable implementation;

    event AccountCreated(address indexed account, address indexed owner, uint256 salt);

    constructor() {
        implementation = new SmartAccount();
    }

    function createAccount(address owner, uint256 salt) external returns (address account) {
        account = getAddress(owner, salt);
        if (account.code.length == 0) {
            Clones.cloneDeterministic(address(implementation), _salt(owner, salt));
            SmartAccount(payable(account)).initialize(owner);
            emit AccountCreated(account, owner, salt);
        }
    }

    function getAddress(address owner, uint256 salt) public view returns (address) {
        return Clones.predictDeterministicAddress(address(implementation), _salt(owner, salt));
    }

    function _salt(address owner, uint256 salt) private pure returns (bytes32) {
        return keccak256(abi.encode(owner, salt));
    }
}

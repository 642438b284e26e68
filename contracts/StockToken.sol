// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Pausable} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Pausable.sol";

/// @title Tokenized stock (devnet)
/// @notice 18-decimal ERC-20 whose owner can pause all transfers (a trading halt) and manage minters.
contract StockToken is ERC20Pausable, Ownable {
    mapping(address account => bool) public isMinter;

    event MinterSet(address indexed account, bool enabled);

    constructor(string memory name_, string memory symbol_) ERC20(name_, symbol_) Ownable(msg.sender) {
        isMinter[msg.sender] = true;
        emit MinterSet(msg.sender, true);
    }

    function setMinter(address account, bool enabled) external onlyOwner {
        isMinter[account] = enabled;
        emit MinterSet(account, enabled);
    }

    /// @notice Mints `amount` to `to`; like any balance change it reverts while paused.
    function mint(address to, uint256 amount) external {
        require(isMinter[msg.sender], "StockToken: caller is not a minter");
        _mint(to, amount);
    }

    function pause() external onlyOwner {
        _pause();
    }

    function unpause() external onlyOwner {
        _unpause();
    }
}

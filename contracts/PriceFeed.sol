// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";

/// @title Owner-set price feed, Chainlink AggregatorV3Interface compatible (8 decimals)
contract PriceFeed is Ownable {
    struct Round {
        int256 answer;
        uint256 startedAt;
        uint256 updatedAt;
    }

    uint8 public constant decimals = 8;
    uint256 public constant version = 1;
    string public description;

    uint80 public latestRound;
    mapping(uint80 roundId => Round) private _rounds;

    event AnswerUpdated(int256 indexed current, uint256 indexed roundId, uint256 updatedAt);
    event NewRound(uint256 indexed roundId, address indexed startedBy, uint256 startedAt);

    constructor(string memory description_, int256 initialAnswer) Ownable(msg.sender) {
        description = description_;
        _newRound(initialAnswer);
    }

    /// @notice Starts a new round with `answer` (8 decimals) and `updatedAt = block.timestamp`.
    function setPrice(int256 answer) external onlyOwner {
        _newRound(answer);
    }

    function latestAnswer() external view returns (int256) {
        return _rounds[latestRound].answer;
    }

    function latestRoundData()
        external
        view
        returns (uint80 roundId, int256 answer, uint256 startedAt, uint256 updatedAt, uint80 answeredInRound)
    {
        return getRoundData(latestRound);
    }

    function getRoundData(uint80 roundId)
        public
        view
        returns (uint80, int256 answer, uint256 startedAt, uint256 updatedAt, uint80 answeredInRound)
    {
        Round memory round = _rounds[roundId];
        require(round.updatedAt > 0, "PriceFeed: no data present");
        return (roundId, round.answer, round.startedAt, round.updatedAt, roundId);
    }

    function _newRound(int256 answer) private {
        uint80 roundId = latestRound + 1;
        latestRound = roundId;
        _rounds[roundId] = Round(answer, block.timestamp, block.timestamp);
        emit NewRound(roundId, msg.sender, block.timestamp);
        emit AnswerUpdated(answer, roundId, block.timestamp);
    }
}
